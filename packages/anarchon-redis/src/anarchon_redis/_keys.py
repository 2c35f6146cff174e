"""Key and channel names. Every key of one job shares the hash tag `{prefix:namespace:job}`."""

from __future__ import annotations

__all__ = ["Keys"]


def _escape(namespace: str) -> str:
    # A ':' in a namespace would make ("a:b", "c") and ("a", "b:c") share keys.
    return namespace.replace("%", "%25").replace(":", "%3A")


class Keys:
    """Names for one prefix."""

    def __init__(self, prefix: str) -> None:
        if not prefix:
            raise ValueError("prefix must not be empty: pass e.g. prefix='anarchon'")
        self.prefix = prefix

    def job(self, namespace: str, job: str) -> str:
        """The job's hash: its fencing counter and newest record."""
        return f"{self.job_prefix(namespace)}{job}}}"

    def others(self, namespace: str, job: str) -> str:
        """Older slots still running under overlap='allow'."""
        return self.job(namespace, job) + ":others"

    def stream(self, namespace: str, job: str) -> str:
        """The claim-only backend's per-job stream."""
        return self.job(namespace, job) + ":stream"

    def history(self, namespace: str, job: str) -> str:
        """The job's ended runs, newest kept (capability `history`)."""
        return self.job(namespace, job) + ":history"

    def catalogue(self, namespace: str) -> str:
        """The hash of the namespace's published jobs, a field per (job, instance) (capability `history`)."""
        return f"{{{self.prefix}:{_escape(namespace)}}}:catalogue"

    def index(self, namespace: str) -> str:
        """The set of job names in a namespace (for `jobs()`)."""
        return f"{{{self.prefix}:{_escape(namespace)}}}:jobs"

    def controls(self, namespace: str) -> str:
        """The hash of the namespace's controls: job name -> "paused:trigger" (capability `control`)."""
        return f"{{{self.prefix}:{_escape(namespace)}}}:controls"

    def schedules(self, namespace: str) -> list[str]:
        """The keys of the namespace's stored schedules (capability `schedules`), in one hash slot:
        `meta` and `body` (hashes by id), the lists `ids` and `tasks` and the due indexes `pdue` and
        `ptaskdue` (by partition, then by task and partition: sorted sets read by lex range), the change
        counter `version`, and `due` and `taskdue`, the previous release's unpartitioned due index, kept
        only until its entries are moved. The tag is the namespace's, so no job key (whose tag goes on
        with `:` and the job's name) can ever be one of them."""
        start = f"{{{self.prefix}:{_escape(namespace)}}}:sched:"
        return [start + part for part in ("meta", "body", "due", "ids", "tasks", "version", "taskdue", "pdue",
                                          "ptaskdue")]

    def job_prefix(self, namespace: str) -> str:
        """What every job key of `namespace` starts with (the job's name and `}` follow)."""
        return f"{{{self.prefix}:{_escape(namespace)}:"

    def wins(self, namespace: str) -> str:
        """The pub/sub channel on which won claims are announced."""
        return f"{self.prefix}:{_escape(namespace)}:won"

    def channel(self, namespace: str) -> str:
        """The pub/sub channel on which releases are announced."""
        return f"{self.prefix}:{_escape(namespace)}:released"
