-- Workspace search (issue 43, item 6): Slack's Real-time Search answers a bot token only
-- with the `action_token` of the event that asked, and then only with what that person
-- may see. The token is a short-lived credential of one person's request: it is kept
-- beside its task, written in the admission transaction (so whichever worker claims the
-- task finds it), and only while the task lives.

-- The token of a task whose message carried one (a mention or a DM; never a schedule's
-- run). Apart from `tasks` so that nothing reading a task (the task view, the queue's
-- claims) reads the token by accident; gone with its task (retention, an uninstall).
CREATE TABLE task_action_tokens (
    task_id  text PRIMARY KEY REFERENCES tasks (id) ON DELETE CASCADE,
    token    text NOT NULL
);

-- A task that ends (done, failed, cancelled: by its worker, an operator, a stop or a
-- deleted message) forgets its token in the same statement, whichever path ended it. A
-- retried task runs without one: a retry is an operator's, not the person's request.
CREATE FUNCTION forget_action_token() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM task_action_tokens WHERE task_id = NEW.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER tasks_forget_action_token
AFTER UPDATE OF state ON tasks
FOR EACH ROW
WHEN (NEW.state IN ('done', 'failed', 'cancelled') AND OLD.state IS DISTINCT FROM NEW.state)
EXECUTE FUNCTION forget_action_token();
