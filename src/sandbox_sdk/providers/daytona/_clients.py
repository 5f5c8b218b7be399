"""The Daytona SDK clients a provider and its sandboxes share."""

from __future__ import annotations

import asyncio
import threading
import weakref

from daytona import AsyncDaytona, Daytona, DaytonaConfig, DaytonaError

from sandbox_sdk.providers.daytona._errors import to_sandbox_error


class DaytonaClients:
    """One sync ``Daytona`` client, and one ``AsyncDaytona`` per event loop.

    ``AsyncDaytona`` keeps an aiohttp session bound to the loop that first used
    it, so a client is made (lazily) for each running loop instead of shared."""

    def __init__(self, config: DaytonaConfig) -> None:
        self.config = config
        try:
            # The SDK checks credentials here (DAYTONA_API_KEY, or DAYTONA_JWT_TOKEN with
            # DAYTONA_ORGANIZATION_ID); failing now is the "clear error at construction".
            self.sync = Daytona(config)
        except DaytonaError as exc:
            raise to_sandbox_error(exc, "cannot create the Daytona client") from exc
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncDaytona] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    def aclient(self) -> AsyncDaytona:
        """The async client of the running event loop (asyncio only)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._async.get(loop)
            if client is None:
                client = self._async[loop] = AsyncDaytona(self.config)
            return client

    async def aclose(self) -> None:
        """Close the running loop's async client (its HTTP session)."""
        with self._lock:
            client = self._async.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.close()  # type: ignore[no-untyped-call]  # unannotated in the SDK
