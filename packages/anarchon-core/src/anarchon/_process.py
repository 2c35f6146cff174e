"""Process-wide state: what anarchon keeps once per process rather than per scheduler, in one object.

`PROCESS` owns all of it:

- the plugin manager, the plugins that failed (each reported once) and the distribution of each plugin
  loaded from an entry point (`_plugins`);
- the URL each backend that `backend_for_url` built came from (`_plugins.url_of`);
- the keeper threads still running, ended at interpreter exit (`_keeper_thread`);
- the schedulers started in a thread of their own, which a child forked after the start warns about
  (`_thread`);
- the handler whose signature `handler_arity` read last (jobs registered in a loop share one).

`PROCESS.reset()` forgets it all, for tests: the next `plugin_manager()` loads the plugins again.
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pluggy

    from ._keeper_thread import KeeperThread
    from ._plugins import PluginError
    from ._thread import SchedulerThread

__all__ = ["PROCESS", "ProcessState"]

_EXIT_JOIN_S = 2.0
"""How long interpreter exit waits for each keeper thread to end."""


class ProcessState:
    """Everything anarchon keeps per process rather than per scheduler; `reset()` forgets it."""

    def __init__(self) -> None:
        self.plugins_lock = threading.Lock()
        """Held while the plugin manager is made (and its entry points loaded)."""
        self.errors_lock = threading.Lock()
        """Held while `plugin_errors` changes (not `plugins_lock`: plugins fail while that one is held)."""
        self._fork_lock = threading.Lock()
        self._exit_lock = threading.Lock()
        self._fork_hooked = False
        self._exit_hooked = False
        self._set_fresh()

    def _set_fresh(self) -> None:
        self.plugin_manager: pluggy.PluginManager | None = None
        """The process's plugin manager, made on first use by `anarchon.plugin_manager()`."""
        self.plugin_errors: dict[tuple[str, str], PluginError] = {}
        """The plugins that failed so far, by (plugin, where): each is reported once."""
        self.plugin_dists: dict[str, str] = {}
        """The distribution of each plugin loaded from an entry point, by plugin name."""
        self.backend_urls: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        """The URL each backend that `backend_for_url` built was built from (never logged: it may hold
        a password)."""
        self.keeper_threads: weakref.WeakSet[KeeperThread] = weakref.WeakSet()
        """The keeper threads still running: interpreter exit ends them."""
        self.scheduler_threads: weakref.WeakSet[SchedulerThread] = weakref.WeakSet()
        """The schedulers started in a thread of their own: a child forked after the start warns."""
        self.last_arity: tuple[object, tuple[bool, bool]] | None = None
        """The last handler `handler_arity` accepted, and its answer."""

    def add_keeper_thread(self, keeper: KeeperThread) -> None:
        """End `keeper` at interpreter exit unless it has ended by then."""
        self.keeper_threads.add(keeper)
        with self._exit_lock:
            if not self._exit_hooked:
                atexit.register(self._end_keeper_threads)
                self._exit_hooked = True

    def forget_keeper_thread(self, keeper: KeeperThread) -> None:
        """`keeper` has ended."""
        self.keeper_threads.discard(keeper)

    def _end_keeper_threads(self) -> None:
        """End every keeper thread still running: its process is going away, so it renews nothing more
        and its leases expire for the backups."""
        keepers = list(self.keeper_threads)
        for keeper in keepers:
            keeper.end_at_exit()
        for keeper in keepers:
            keeper.join(_EXIT_JOIN_S)

    def add_scheduler_thread(self, runner: SchedulerThread) -> None:
        """Have a child forked from now on warn that `runner`'s thread did not come with it."""
        self.scheduler_threads.add(runner)
        with self._fork_lock:
            if not self._fork_hooked and hasattr(os, "register_at_fork"):
                os.register_at_fork(after_in_child=self._after_fork_in_child)
                self._fork_hooked = True

    def _after_fork_in_child(self) -> None:
        for runner in list(self.scheduler_threads):
            runner.warn_if_forked()

    def reset(self) -> None:
        """Forget everything (for tests): end the keeper threads still running, as at exit, and drop
        the plugin manager, the plugins' failures, the backends' URLs, the threads and the cache.

        The at-fork hook stays (it cannot be removed), with no scheduler thread left to warn about.
        """
        self._end_keeper_threads()
        with self._exit_lock:
            if self._exit_hooked:
                atexit.unregister(self._end_keeper_threads)
                self._exit_hooked = False
        with self.plugins_lock, self.errors_lock:
            self._set_fresh()


PROCESS = ProcessState()
"""The one `ProcessState` of this process."""
