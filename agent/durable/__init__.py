"""Durable work: the task runner whose workers lease tasks and subtasks, run one round
per lease and deliver each message once; the responder that turns a round's input into
a prompt, controls and a model call; and the supervisor for background tasks. The top
layer: it may import every other."""
