-- A file's moves told to whoever listens: the web app's live ingestion history (api/file_events.py) streams them to
-- the file's tenant. The notice names the tenant and the file only; a listener reads the row itself, under the
-- tenant it serves. Sent at commit (a rolled-back move tells nothing), one per row and transaction.
CREATE FUNCTION notify_file_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('file_events', json_build_object('tenant_id', NEW.tenant_id, 'file_id', NEW.run_id)::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER ingestion_runs_notify_insert AFTER INSERT ON ingestion_runs
    FOR EACH ROW EXECUTE FUNCTION notify_file_event();

CREATE TRIGGER ingestion_runs_notify_update AFTER UPDATE ON ingestion_runs
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.stats IS DISTINCT FROM NEW.stats
                       OR OLD.error IS DISTINCT FROM NEW.error)
    EXECUTE FUNCTION notify_file_event();
