"""What GPU time costs (issue 28.6): a rate per GPU model, pure.

``cost: {per_gpu_hour: {"H100": 2.5, default: 1.0}, currency: EUR}``: a card's rate is
that of the longest model key found in its name ("NVIDIA H100 80GB HBM3" is an H100),
case-insensitive, else ``default`` (0 when the policy gives none).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class CostRates:
    per_gpu_hour: Mapping[str, float] = field(default_factory=dict)  # model key -> rate
    default: float = 0.0
    currency: str = ""

    def model(self, gpu_name: str | None) -> str:
        """The policy's model key for a card (what cost per GPU model groups by)."""
        name = (gpu_name or "").lower()
        found = [key for key in self.per_gpu_hour if key.lower() in name]
        return max(found, key=lambda k: (len(k), k)) if found else "default"

    def rate(self, gpu_name: str | None) -> float:
        key = self.model(gpu_name)
        return self.per_gpu_hour.get(key, self.default)

    def cost(self, gpu_name: str | None, gpu_hours: float) -> float:
        return round(self.rate(gpu_name) * gpu_hours, 2)
