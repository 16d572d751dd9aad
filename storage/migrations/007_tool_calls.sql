-- Every work-tool call of a round (built-in and MCP), as it ran: people watch it in the
-- thread, operators read it later (the task view). Arguments and output are capped.
CREATE TABLE tool_calls (
    task_id     text NOT NULL,
    round       integer NOT NULL,
    call_id     text NOT NULL,
    name        text NOT NULL,
    arguments   text NOT NULL,
    state       text NOT NULL CHECK (state IN ('running', 'ok', 'error')),
    output      text NOT NULL DEFAULT '',
    started_at  timestamptz NOT NULL DEFAULT now(),
    ended_at    timestamptz,
    PRIMARY KEY (task_id, call_id)
);
