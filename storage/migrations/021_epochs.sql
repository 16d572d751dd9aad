-- Prompt epochs that are whole (issue 35): an epoch is the system prompt together with
-- what the model is offered under it (the control and work tools' names, descriptions and
-- schemas, the subtask types in delegate's) and the sub-agents' prompts; each session
-- counts the epochs it went through and says why each one began.

-- What an epoch offers: the tools as canonical JSON (`offer`, stored once, for audits),
-- its hash (compared at every round) and the tools' names in the order the model sees
-- them (for `threadgate tasks show`); and each sub-agent's system prompt, by subtask type.
-- Epochs stored before this migration recorded none of it: `offer_hash` NULL.
ALTER TABLE prompt_epochs ADD COLUMN offer text;
ALTER TABLE prompt_epochs ADD COLUMN offer_hash text;
ALTER TABLE prompt_epochs ADD COLUMN tools text[] NOT NULL DEFAULT '{}';
ALTER TABLE prompt_epochs ADD COLUMN subagents jsonb NOT NULL DEFAULT '{}';

-- A session's epochs, numbered from 1 in the order they began, each with why: the
-- session's first task (`start`), a compaction (`compaction`, written with its summary),
-- the first task after `threadgate sessions reset` (`reset`), a deploy that changed what
-- the model is offered (`offer_changed`), or a pin from before this migration (`legacy`).
-- `sessions.prompt_epoch` stays the current one (NULL after a reset, until the next task).
CREATE TABLE session_epochs (
    session_id  text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    number      integer NOT NULL CHECK (number >= 1),
    epoch       text NOT NULL REFERENCES prompt_epochs (hash),
    reason      text NOT NULL
                CHECK (reason IN ('start', 'compaction', 'reset', 'offer_changed', 'legacy')),
    at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, number)
);

-- Every session pinned before now gets its epoch as number 1, `legacy`, dated by its
-- first answer under it (or the session's start when it has none).
INSERT INTO session_epochs (session_id, number, epoch, reason, at)
SELECT s.id, 1, s.prompt_epoch, 'legacy',
       coalesce((SELECT min(m.created_at) FROM messages m
                 WHERE m.session_id = s.id AND m.prompt_epoch = s.prompt_epoch), s.created_at)
FROM sessions s WHERE s.prompt_epoch IS NOT NULL;

-- Which epoch (so which sub-agent prompt) a subtask ran under, stamped by its run.
ALTER TABLE subtasks ADD COLUMN prompt_epoch text;
