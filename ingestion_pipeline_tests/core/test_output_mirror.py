"""A stream written into a file and shown where it went before, by a thread (``core/output_mirror.py``)."""

import io
import os
import subprocess
import sys
import time

from ingestion_pipeline.core.output_mirror import mirrored_to_file


def test_what_the_process_and_its_child_write_lands_in_the_file_and_where_it_went_before(tmp_path):
    before = tmp_path / "terminal.txt"
    captured = tmp_path / "step" / "out.txt"
    with open(before, "w") as stream:
        stream.write("earlier\n")
        with mirrored_to_file(stream, captured):
            stream.write("from the process\n")
            stream.flush()  # a file stream buffers; the child writes to the descriptor at once
            subprocess.run([sys.executable, "-c", "print('from a child')"], stdout=stream, check=True)
            os.write(stream.fileno(), b"straight to the descriptor\n")
        stream.write("later\n")
    lines = ["from the process", "from a child", "straight to the descriptor"]
    assert captured.read_text().splitlines() == lines
    assert before.read_text().splitlines() == ["earlier", *lines, "later"]


def test_the_last_output_is_copied_before_the_capture_ends(tmp_path):
    before, captured = tmp_path / "terminal.txt", tmp_path / "out.txt"
    lines = [f"line {i} " + "x" * 200 for i in range(5000)]  # 1 MB written in far less than the copier's interval
    with open(before, "w") as stream, mirrored_to_file(stream, captured, interval=30):
        stream.write("\n".join(lines) + "\n")
    assert before.read_text().splitlines() == lines
    assert captured.read_text().splitlines() == lines


def test_output_shows_where_it_went_before_while_the_capture_goes_on(tmp_path):
    before, captured = tmp_path / "terminal.txt", tmp_path / "out.txt"
    with open(before, "w") as stream, mirrored_to_file(stream, captured, interval=0.05):
        stream.write("progress 1 of 2\n")
        stream.flush()
        deadline = time.monotonic() + 10
        while "progress 1" not in before.read_text() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert before.read_text() == "progress 1 of 2\n"


def test_a_stream_without_a_descriptor_is_left_alone_and_the_file_still_made(tmp_path):
    stream = io.StringIO()
    with mirrored_to_file(stream, tmp_path / "out.txt"):
        stream.write("kept in memory\n")
    assert stream.getvalue() == "kept in memory\n"
    assert (tmp_path / "out.txt").read_bytes() == b""


def test_a_destination_whose_reader_is_gone_neither_hangs_nor_fails_the_capture(tmp_path):
    read_end, write_end = os.pipe()
    os.close(read_end)  # writing there now fails (EPIPE)
    captured = tmp_path / "out.txt"
    with os.fdopen(write_end, "w") as stream:
        started = time.monotonic()
        with mirrored_to_file(stream, captured, interval=0.01):
            stream.write("kept all the same\n")
        assert time.monotonic() - started < 5
    assert captured.read_text() == "kept all the same\n"


def test_a_child_that_outlives_the_capture_writes_into_the_file_without_failing(tmp_path):
    before, captured = tmp_path / "terminal.txt", tmp_path / "out.txt"
    script = "import sys, time; print('during', flush=True); time.sleep(0.5); print('after', flush=True)"
    with open(before, "w") as stream:
        with mirrored_to_file(stream, captured):
            child = subprocess.Popen([sys.executable, "-c", script], stdout=stream)
            deadline = time.monotonic() + 10
            while "during" not in captured.read_text() and time.monotonic() < deadline:
                time.sleep(0.02)
        assert child.wait(10) == 0  # its descriptor is the file's: nothing broke when the capture ended
    assert captured.read_text().splitlines() == ["during", "after"]
    assert before.read_text().splitlines() == ["during"]


def test_a_stream_whose_descriptor_is_closed_is_left_alone(tmp_path):
    read_end, write_end = os.pipe()
    os.close(read_end)
    stream = os.fdopen(write_end, "w")
    os.close(write_end)  # the stream still names the descriptor, which is gone (a daemon's closed stdout)
    with mirrored_to_file(stream, tmp_path / "out.txt"):
        pass
    assert (tmp_path / "out.txt").read_bytes() == b""
    stream.close = lambda: None  # its descriptor is already closed
