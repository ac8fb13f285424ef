"""The record of a run: the history, the context view sent to the model, transcripts, images."""
