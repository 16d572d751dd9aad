-- What people and other bots can make the agent do (issue 44): bots answered only where
-- allowed and never in an unbounded loop.

-- Each bot-authored turn taken (a bot's mention the bot policy allowed), by the task it
-- is for, with its place in its thread's window (`rank`): the thread's count decides
-- whether it is answered, the same count on every replica, and a redelivery of the same
-- event is decided as its first delivery was (storage/bot_turns.py). Rows older than the
-- window are deleted as the thread's next bot turn is counted.
CREATE TABLE bot_turns (
    task_id text PRIMARY KEY,
    thread text NOT NULL,
    bot text NOT NULL,
    rank integer NOT NULL CHECK (rank > 0),
    at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX bot_turns_thread ON bot_turns (thread, at);
