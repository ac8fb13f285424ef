"""What hears a run's events (:mod:`agentkernel.events`): the timeline the panel and the record show
(:mod:`~agentkernel.listeners.timeline`), the JSONL transcript (:mod:`~agentkernel.listeners.transcript`) and the
OpenTelemetry spans (:mod:`~agentkernel.listeners.tracing`). A run's data (history, context, images) stays in
:mod:`agentkernel.record`; nothing below the loop, the served session and the front end imports a listener
(``tests/unit/test_layers.py``). Each module is imported where a run first needs it."""
