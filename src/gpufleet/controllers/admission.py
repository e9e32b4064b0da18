"""Admission checks that need the MIG catalogue, registered into the API's validator hook.

`gpufleet.api` may not import `gpufleet.sharing`, so a GPUPool or Node whose MIG layout cannot exist
on its GPU model (an unknown profile, instances that do not fit in one GPU's slices) would pass the
API's own checks. Importing `gpufleet.controllers` registers `check_mig_layouts` for both kinds, so
the server `gpufleet up` runs and `load_objects` refuse such objects instead of creating nodes that
can never be set up. (It lives here rather than in `sharing`, which must stay free of the API's
time-aware modules.)
"""

from __future__ import annotations

from typing import Any

from gpufleet.api.errors import ValidationError
from gpufleet.api.resource import Resource
from gpufleet.api.validation import register_validator
from gpufleet.sharing import mig

# kind -> where its GPU model and sharing live, for the error's field path.
_SPEC_FIELDS = {"GPUPool": "spec", "Node": "spec"}


def check_mig_layouts(obj: Resource) -> None:
    """Every MIG layout of the object's `spec.sharing.mig` fits one GPU of its `spec.gpuModel`."""
    spec: Any = getattr(obj, "spec", None)
    sharing = getattr(spec, "sharing", None)
    layouts = getattr(sharing, "mig", None)
    if not layouts:
        return
    model = str(getattr(spec, "gpu_model", "") or "")
    prefix = f"{_SPEC_FIELDS.get(obj.kind, 'spec')}.sharing.mig"
    for gpu, names in layouts.items():
        field = f"{prefix}.{gpu}"
        if not mig.mig_capable(model):
            raise ValidationError(f"GPU model {model!r} does not support MIG", field=field)
        try:
            mig.plan_layout(model, list(names), field=field)
        except ValidationError as exc:
            # plan_layout names the instance (`...mig.*[1]`); the layout as a whole is the field here.
            raise ValidationError(exc.detail, field=field) from None


def register() -> None:
    for kind in _SPEC_FIELDS:
        register_validator(kind, check_mig_layouts)


register()
