"""S3 event notifications (``ObjectCreated:*``, ``ObjectRemoved:*``) of a watched bucket, applied to its
registered sources exactly as a listing would record the key: new -> a version, changed ETag -> a new
version, gone -> deactivated.

The event only says *which* key to look at: its current state comes from a HEAD of the object, so a
redelivered event, or one overtaken by a later change, records what is true now. Where the event carries S3's
``sequencer`` (real S3 does), the greatest one seen per key is kept; an event whose sequencer is not greater is
still looked at (its HEAD) but is ``stale`` when the HEAD changes nothing. A sequencer is never trusted past
the object's own HEAD: an event is not verified to come from S3 (anyone who may send to the queue can write
one), so a forged ``"FFFF…"`` must not make the real later change be ignored. The periodic listing stays as
reconciliation for lost notifications.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_plus

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.sources import locations
from ingestion_pipeline.sources.registry import Source, list_sources
from ingestion_pipeline.sources.sync import MetricIntake, record_object

APPLIED, STALE, UNWATCHED, TEST_EVENT = "applied", "stale", "no source watches it", "test event"


@dataclass(frozen=True)
class ObjectEvent:
    bucket: str
    key: str
    event_name: str
    sequencer: str | None


class NotAnS3Event(ValueError):
    pass


def is_s3_notification(body: dict) -> bool:
    if body.get("Event") == "s3:TestEvent":
        return True
    records = body.get("Records")
    return isinstance(records, list) and bool(records) and all(
        isinstance(r, dict) and r.get("eventSource") == "aws:s3" for r in records)


def parse_notification(body: dict) -> list[ObjectEvent]:
    """The object events of a notification ([] for S3's test event); ``NotAnS3Event`` if it is malformed."""
    if body.get("Event") == "s3:TestEvent":
        return []
    events = []
    for record in body.get("Records", []):
        try:
            s3 = record["s3"]
            events.append(ObjectEvent(s3["bucket"]["name"], unquote_plus(s3["object"]["key"]), record["eventName"],
                                      s3["object"].get("sequencer")))
        except (KeyError, TypeError) as exc:
            raise NotAnS3Event(f"an S3 event record without {exc}") from None
    return events


def newer(sequencer: str, than: str) -> bool:
    """S3's rule: hex strings of possibly different lengths, compared after left-padding the shorter with 0s."""
    width = max(len(sequencer), len(than))
    return sequencer.upper().rjust(width, "0") > than.upper().rjust(width, "0")


def _current_state(client: Any, bucket: str, key: str) -> dict | None:
    from botocore.exceptions import ClientError

    try:
        head = client.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return None
        raise
    return {"Key": key, "ETag": head["ETag"], "Size": head["ContentLength"], "LastModified": head.get("LastModified")}


def apply_event(db: Database, event: ObjectEvent, client_for: Callable[[Source], Any], *,
                max_bytes_for: Callable[[Source], int],
                metric_intake_for: Callable[[Source, Any], MetricIntake | None]) -> str:
    """Record what ``event``'s key is now in every active source watching it; the outcome."""
    with db.connection() as conn:
        sources = [s for s in list_sources(conn, active_only=True)
                   if s.bucket == event.bucket and event.key.startswith(s.prefix) and _bound(conn, s)]
    if not sources:
        return UNWATCHED
    outcome = STALE
    for source in sources:
        client = client_for(source)
        with db.transaction() as conn:
            # the source's row orders this with the listing's pages of the same source
            conn.execute("SELECT 1 FROM ingestion_sources WHERE source_id = %s FOR NO KEY UPDATE",
                         (source.source_id,))
            in_order = True
            if event.sequencer is not None:
                last = conn.execute("SELECT sequencer FROM s3_event_sequencers WHERE source_id = %s AND key = %s",
                                    (source.source_id, event.key)).fetchone()
                in_order = last is None or newer(event.sequencer, last["sequencer"])
            if event.sequencer is not None and in_order:
                conn.execute(
                    """INSERT INTO s3_event_sequencers (source_id, key, sequencer, event_name) VALUES (%s, %s, %s, %s)
                       ON CONFLICT (source_id, key) DO UPDATE SET sequencer = EXCLUDED.sequencer,
                              event_name = EXCLUDED.event_name, applied_at = now()""",
                    (source.source_id, event.key, event.sequencer, event.event_name))
            report = record_object(conn, source, _current_state(client, event.bucket, event.key), event.key,
                                   max_bytes=max_bytes_for(source), metric_intake=metric_intake_for(source, client))
            if in_order or report.new or report.changed or report.deleted:
                outcome = APPLIED
    return outcome


def _bound(conn, source: Source) -> bool:
    """An event reaches only sources whose location is still bound to their tenant (``sources/locations.py``)."""
    try:
        locations.require(conn, source.tenant_id, locations.location(source.bucket, source.prefix,
                                                                     source.endpoint_url), entrance="s3 event",
                          audit=False)
        return True
    except locations.LocationNotBound:
        return False
