"""Dead-letter queue replay: re-ingest what a connector dead-lettered, after a fix."""

from .replay import DeadLetterReplaySource, DeadLetterReplayTask

__all__ = ["DeadLetterReplaySource", "DeadLetterReplayTask"]
