"""Daytona sandboxes (``pip install "sandbox-sdk-py[daytona]"``).

Credentials come from the SDK's usual environment variables (``DAYTONA_API_KEY``,
``DAYTONA_API_URL``, ``DAYTONA_TARGET``; or ``DAYTONA_JWT_TOKEN`` with
``DAYTONA_ORGANIZATION_ID``) or from the provider's arguments.
"""

from sandbox_sdk.providers.daytona.provider import DaytonaProvider
from sandbox_sdk.providers.daytona.sandbox import DaytonaSandbox

__all__ = ["DaytonaProvider", "DaytonaSandbox"]
