"""CDI spec files, one per prepared claim: the plugin's only hand-off to the container runtime.

The kubelet passes the CDI device IDs the plugin returns to the runtime, which looks them up in
the spec files of the CDI directory (``/var/run/cdi``) and applies their container edits. This
module owns everything about those files: the spec kind (``<driver>/<class>``), device names
(derived from the claim UID, so two claims sharing one device never collide), file names
(``<driver>-<class>_<claim uid>.json``, the CDI "transient spec" convention), the JSON itself
(CDI 0.8) and creating/deleting files atomically. A spec path is always one file directly in
the CDI directory: the claim UID is sanitised into the name and the result confined to the
directory (``fsutil.confined``), whatever the UID. The rest of the plugin calls
:meth:`CdiHandler.create_claim_spec_file`, :meth:`CdiHandler.delete_claim_spec_file` and the
naming helpers, nothing else.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dra_solver.kubeletplugin import fsutil
from dra_solver.kubeletplugin.checkpoint import PreparedDevice

CDI_VERSION = "0.8.0"
DIR_MODE = 0o755
SPEC_MODE = 0o644
CLAIM_ANNOTATION = "kubeletplugin.dra-solver.dev/claim"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:-]")


class CdiHandler:
    def __init__(self, cdi_dir: Path, *, driver: str, cdi_class: str) -> None:
        self.cdi_dir = cdi_dir
        self.vendor = driver
        self.cdi_class = cdi_class

    @property
    def kind(self) -> str:
        return f"{self.vendor}/{self.cdi_class}"

    @property
    def _prefix(self) -> str:
        return f"{self.vendor}-{self.cdi_class}_"

    # -- naming (pure) ----------------------------------------------------------------------

    @staticmethod
    def device_name(claim_uid: str, device: str, share_id: str | None) -> str:
        """Unique per claim and device (and share), valid as a CDI device name."""
        name = f"{claim_uid}-{device}" + (f"-{share_id}" if share_id else "")
        return _UNSAFE.sub("-", name)

    def device_id(self, cdi_name: str) -> str:
        """The fully qualified ID the kubelet hands to the runtime: ``vendor/class=name``."""
        return f"{self.kind}={cdi_name}"

    def spec_path(self, claim_uid: str) -> Path:
        """``<cdi dir>/<driver>-<class>_<uid>.json``; raises fsutil.UnsafePathError otherwise."""
        return fsutil.confined(self.cdi_dir, f"{self._prefix}{_UNSAFE.sub('-', claim_uid)}.json")

    def spec(
        self, claim_uid: str, claim_ref: str, devices: Sequence[PreparedDevice]
    ) -> dict[str, Any]:
        """The spec document for one claim (pure)."""
        return {
            "cdiVersion": CDI_VERSION,
            "kind": self.kind,
            "annotations": {CLAIM_ANNOTATION: f"{claim_ref}:{claim_uid}"},
            "devices": [{"name": d.cdi_name, "containerEdits": d.edits.to_cdi()} for d in devices],
        }

    # -- files ------------------------------------------------------------------------------

    def create_claim_spec_file(
        self, claim_uid: str, claim_ref: str, devices: Sequence[PreparedDevice]
    ) -> Path:
        path = self.spec_path(claim_uid)
        # Shared with the runtime and other drivers: created if missing, never re-permissioned.
        fsutil.ensure_dir(self.cdi_dir, mode=DIR_MODE, enforce=False)
        body = json.dumps(self.spec(claim_uid, claim_ref, devices), indent=2) + "\n"
        # World-readable like every CDI spec: runtimes and tools read them, nothing secret.
        # The mode is exact whatever the umask (write_atomic sets it with fchmod).
        fsutil.write_atomic(path, body.encode(), mode=SPEC_MODE)
        return path

    def delete_claim_spec_file(self, claim_uid: str) -> bool:
        return fsutil.remove_durably(self.spec_path(claim_uid))

    def remove_temp_files(self) -> list[Path]:
        """Our own leftover temporary spec files (a crash mid-write); other drivers' stay."""
        return fsutil.remove_temp_files(self.cdi_dir, prefix=self._prefix)

    def claim_spec_files(self) -> dict[str, Path]:
        """Spec files this handler owns, by claim UID (other drivers' files are ignored)."""
        out: dict[str, Path] = {}
        if not self.cdi_dir.is_dir():
            return out
        for path in sorted(self.cdi_dir.iterdir()):
            name = path.name
            if name.startswith(self._prefix) and name.endswith(".json"):
                out[name[len(self._prefix) : -len(".json")]] = path
        return out
