"""The data a run is made of: the history (items and the call/output invariant), the context view sent to the model
(compaction), images. What hears a run (timeline, transcript, tracing) is in :mod:`agentkernel.listeners`."""
