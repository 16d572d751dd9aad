-- Issue 47, items 5 and 9.

-- `threadgate sessions clear` is recorded like a reset: who cleared a session's history,
-- when and why (storage/sessions.py). A deleted session takes its audit rows with it.
ALTER TABLE session_interventions DROP CONSTRAINT session_interventions_action_check;
ALTER TABLE session_interventions ADD CONSTRAINT session_interventions_action_check
    CHECK (action IN ('reset', 'clear'));
