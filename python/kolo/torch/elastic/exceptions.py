"""The interruption that makes every rank reset, as horovod.common.exceptions."""


class HostsUpdatedInterrupt(RuntimeError):
    """Raised on every rank at the same step when the job's membership changed:
    run() then resets to the new membership without restoring the last commit.

    skip_sync: True when the state need not be broadcast after the reset (every
    remaining rank already holds the same state and no rank joined)."""

    def __init__(self, skip_sync=False):
        super().__init__('the job\'s membership changed: every rank resets')
        self.skip_sync = bool(skip_sync)
