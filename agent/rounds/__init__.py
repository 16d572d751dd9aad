"""One round: the loop that asks the model until a control tool ends it, the control
tools themselves (`final_reply`, `delegate`), the prompt, the work tools, numbered
references, the subtask types with the built-in sub-agent, and plugins. Imports
`agent.models` and `agent.core`; knows nothing of leases, stores or retries across
rounds."""
