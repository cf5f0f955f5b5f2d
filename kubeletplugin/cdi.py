"""CDI spec files, one per prepared claim: the plugin's only hand-off to the container runtime.

The kubelet passes the CDI device IDs the plugin returns to the runtime, which looks them up in
the spec files of the CDI directory (``/var/run/cdi``) and applies their container edits. This
module owns everything about those files: the spec kind (``<driver>/<class>``), device names
(derived from the claim UID, so two claims sharing one device never collide), file names
(``<driver>-<class>_<claim uid>.json``, the CDI "transient spec" convention), the JSON itself
(CDI 0.8) and creating/deleting files atomically. The rest of the plugin calls
:meth:`CdiHandler.create_claim_spec_file`, :meth:`CdiHandler.delete_claim_spec_file` and the
naming helpers, nothing else.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kubeletplugin import fsutil
from kubeletplugin.checkpoint import PreparedDevice

CDI_VERSION = "0.8.0"
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
        return self.cdi_dir / f"{self._prefix}{_UNSAFE.sub('-', claim_uid)}.json"

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
        self.cdi_dir.mkdir(parents=True, exist_ok=True)
        path = self.spec_path(claim_uid)
        body = json.dumps(self.spec(claim_uid, claim_ref, devices), indent=2) + "\n"
        # World-readable like every CDI spec: runtimes and tools read them, nothing secret.
        fsutil.write_atomic(path, body.encode(), mode=0o644)
        return path

    def delete_claim_spec_file(self, claim_uid: str) -> bool:
        return fsutil.remove_durably(self.spec_path(claim_uid))

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
