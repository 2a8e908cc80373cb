"""Generate one small document of each format read through unstructured (pptx, xlsx, eml, msg, epub, odt,
rtf), each with a sentence of its own, for the tests and the demo.

python-pptx and openpyxl write the Office files, the standard library the e-mail, pandoc (the
pypandoc-binary wheel) the e-book, OpenDocument and RTF files, ``outlook_msg`` the Outlook message.
"""

from __future__ import annotations

import email.message
import email.utils
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ingestion_pipeline.samples.outlook_msg import write_msg


@dataclass(frozen=True)
class Sample:
    path: Path
    query: str  # words found only in this file
    text: str  # the text a search for ``query`` must return
    section: str  # what its citation names (slide or section title, sheet name, e-mail subject)
    page: int | None = None  # slide or sheet number, where the format has them


def write_office_samples(folder: Path, *, large_sheet_rows: int = 0) -> dict[str, Sample]:
    """Write the samples into ``folder``; ``large_sheet_rows`` adds a sheet that long (split by the chunker)."""
    folder.mkdir(parents=True, exist_ok=True)
    return {
        ".pptx": _pptx(folder / "harbour-report.pptx"),
        ".xlsx": _xlsx(folder / "lighthouse-budget.xlsx", large_sheet_rows),
        ".eml": _eml(folder / "lantern-maintenance.eml"),
        ".msg": _msg(folder / "fuel-order.msg"),
        ".epub": _pandoc(folder / "tidal-almanac.epub", "epub", "Tidal Almanac", "Spring tides",
                         "The spring tide peaks near the equinox with unusual strength.", "equinox spring tide"),
        ".odt": _pandoc(folder / "keeper-log.odt", "odt", "Keeper Log", "Night watch",
                        "The foghorn sounded eleven times during the night watch.", "foghorn night watch"),
        ".rtf": _pandoc(folder / "pilot-notes.rtf", "rtf", "Pilot Notes", "Sandbanks",
                        "Pilots avoid the shifting sandbanks south of the breakwater.",
                        "shifting sandbanks breakwater"),
    }


def _pptx(path: Path) -> Sample:
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    first = deck.slides.add_slide(deck.slide_layouts[1])
    first.shapes.title.text = "Quarterly Harbour Report"
    first.placeholders[1].text = "Cormorant sightings rose sharply\nDredging finished in March"
    second = deck.slides.add_slide(deck.slide_layouts[5])
    second.shapes.title.text = "Tonnage by pier"
    table = second.shapes.add_table(3, 2, Inches(1), Inches(2), Inches(4), Inches(1)).table
    for r, (a, b) in enumerate([("Pier", "Tonnes"), ("North", "1200"), ("South", "800")]):
        table.cell(r, 0).text, table.cell(r, 1).text = a, b
    second.notes_slide.notes_text_frame.text = "The lighthouse keeper counted the barges."
    deck.save(path)
    return Sample(path, "cormorant sightings", "Cormorant sightings rose sharply", "Quarterly Harbour Report", 1)


def _xlsx(path: Path, large_rows: int) -> Sample:
    import openpyxl

    book = openpyxl.Workbook()
    budget = book.active
    budget.title = "Budget 2026"
    budget.append(["Item", "Amount"])
    budget.append(["Lighthouse lamp", 340])
    budget.append(["Mooring rope", 12])
    staff = book.create_sheet("Staff")
    staff.append(["Name", "Role"])
    staff.append(["Ada Quill", "Keeper"])
    if large_rows:
        log = book.create_sheet("Tide log")
        log.append(["Day", "High water", "Low water", "Observer"])
        for day in range(1, large_rows + 1):
            log.append([f"Day {day}", f"{day % 12 + 1}:{day % 60:02d}", f"{(day + 6) % 12 + 1}:15", "Ada Quill"])
    book.save(path)
    return Sample(path, "lighthouse lamp", "Lighthouse lamp | 340", "Budget 2026", 1)


def _eml(path: Path) -> Sample:
    message = email.message.EmailMessage()
    message["Subject"] = "Lantern maintenance window"
    message["From"] = "Ada Quill <ada@harbour.example>"
    message["To"] = "ops@harbour.example"
    message["Date"] = email.utils.format_datetime(datetime(2026, 3, 4, 9, 30, tzinfo=UTC))
    message.set_content("Hello team,\n\nThe lantern will be serviced on Friday between 10:00 and 14:00.\n\n"
                        "Regards,\nAda")
    path.write_bytes(bytes(message))
    return Sample(path, "lantern serviced Friday", "The lantern will be serviced on Friday between 10:00 and 14:00.",
                  "Lantern maintenance window (from Ada Quill <ada@harbour.example>, 2026-03-04 09:30)")


def _msg(path: Path) -> Sample:
    write_msg(path, subject="Lighthouse fuel order", sender_name="Ada Quill", sender_email="ada@harbour.example",
              body="Please order forty litres of lamp oil before the storm season.\n\nThanks,\nAda",
              sent=datetime(2026, 3, 5, 8, 15, tzinfo=UTC))
    return Sample(path, "lamp oil storm season", "Please order forty litres of lamp oil before the storm season.",
                  'Lighthouse fuel order (from "Ada Quill" <ada@harbour.example>, 2026-03-05 08:15)')


def _pandoc(path: Path, to: str, title: str, section: str, sentence: str, query: str) -> Sample:
    import pypandoc

    markdown = f"# {title}\n\n## {section}\n\n{sentence}\n\n- first item\n- second item\n"
    if to == "rtf":  # a text format: pandoc returns it
        path.write_text(pypandoc.convert_text(markdown, "rtf", format="md", extra_args=["--standalone"]),
                        encoding="utf-8")
    else:
        pypandoc.convert_text(markdown, to, format="md", outputfile=str(path))
    return Sample(path, query, sentence, section)
