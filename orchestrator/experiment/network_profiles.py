"""Named network profiles: `network: {profile: lte}` (keys written next to it override it).

Each profile is the `network:` keys it stands for plus `source`, which says where every number
comes from. Round-trip figures are split evenly between the two directions.

- 3g, 3g-slow, lte: WebPageTest's connectivity presets (WPO-Foundation/webpagetest,
  www/settings/connectivity.ini.sample), whose `latency` is the added round trip and whose
  bwIn/bwOut are the down/up rates. Lighthouse's throttling notes (docs/throttling.md) say its
  mobile preset (150 ms, 1.6 Mbit/s down, 750 kbit/s up) matches WebPageTest's "Mobile 3G -
  Fast"; `3g` here is WebPageTest's plain "3G" (300 ms).
- intercontinental, transatlantic: mean ping times between WonderProxy servers, Paris <->
  Sydney 348.84 ms and New York <-> Paris 78.33 ms (P. Reinheimer, "Miles per Millisecond",
  wonderproxy.com/blog/miles-per-milisecond, 2011). No bandwidth: the long path, not the access
  link, is what these model.
- wifi-lossy: NOT a measured fit. 2 ms +/- 1 ms (normal) each way and Gilbert-Elliott loss of
  about 1 % in bursts of mean length 4 chunks, an illustrative bursty access link. The chain's
  parameters are derived from those two targets with the simple Gilbert relations (loss_bad 1,
  loss_good 0: mean burst = 1/r, loss = p / (p + r)) as in Pieper & Voran, "Relating
  Gilbert-Elliott parameters to error statistics" (NTIA, 2023). Published 802.11 loss traces
  fit GE poorly (Cardoso & de Rezende, IEEE Comm. Letters 2009), so use it to see how a server
  behaves under bursty loss, not to predict a particular Wi-Fi network.
"""

from __future__ import annotations

from typing import Any

PROFILES: dict[str, dict[str, Any]] = {
    "3g": {
        "delay": "150ms",
        "bandwidth_down": "1600kbit",
        "bandwidth_up": "768kbit",
        "source": "WebPageTest connectivity preset 3G: 300 ms RTT, 1.6 Mbit/s down, 768 kbit/s up",
    },
    "3g-slow": {
        "delay": "200ms",
        "bandwidth_down": "400kbit",
        "bandwidth_up": "400kbit",
        "source": "WebPageTest connectivity preset 3GSlow: 400 ms RTT, 400 kbit/s each way",
    },
    "lte": {
        "delay": "35ms",
        "bandwidth_down": "12mbit",
        "bandwidth_up": "12mbit",
        "source": "WebPageTest connectivity preset LTE: 70 ms RTT, 12 Mbit/s each way",
    },
    "intercontinental": {
        "delay": "174420us",
        "source": "WonderProxy ping Paris <-> Sydney: 348.84 ms RTT (2011)",
    },
    "transatlantic": {
        "delay": "39165us",
        "source": "WonderProxy ping New York <-> Paris: 78.33 ms RTT (2011)",
    },
    "wifi-lossy": {
        "delay": "2ms",
        "jitter": "1ms",
        "distribution": "normal",
        "loss_burst": {"p": 0.002525, "r": 0.25, "loss_bad": 1.0, "loss_good": 0.0},
        "source": "illustrative, not a measured fit: ~1 % loss in bursts of mean 4 "
        "(simple Gilbert, r = 1/4, p = r*0.01/0.99; NTIA Pieper & Voran 2023)",
    },
}


def profile_keys(name: Any) -> dict[str, Any]:
    """The `network:` keys of profile `name` (without `source`); ValueError if unknown."""
    if not isinstance(name, str) or name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; known profiles: {', '.join(sorted(PROFILES))}")
    return {k: v for k, v in PROFILES[name].items() if k != "source"}


def profile_source(name: str) -> str:
    return PROFILES[name]["source"]
