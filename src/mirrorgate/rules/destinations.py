"""A network destination the release before never named: what @solana/web3.js 1.95.6 could do
that 1.95.5 could not. Its RPC client always used `fetch`, so no capability was gained; the
stealer's `fetch('https://sol-rpc.xyz/...')` was a host the package had never written. Pure:
it compares the `sent` and `hosts` of two `Capabilities` (`npm.capabilities`); part of
`rules.capabilities.gained`. docs/verdicts.md "A new destination" tells why and the figures.
"""

from __future__ import annotations

from mirrorgate.npm.capabilities import INSTALL, LOAD, Capabilities, Sent
from mirrorgate.npm.jsuses import NETWORK

__all__ = ["SHARED_SUFFIXES", "new_destinations", "site_of"]

SHARED_SUFFIXES = (
    "github.io", "githubusercontent.com", "gitlab.io", "herokuapp.com", "vercel.app",
    "netlify.app", "workers.dev", "pages.dev", "ngrok.io", "ngrok-free.app", "ngrok.app",
    "glitch.me", "repl.co", "replit.dev", "onrender.com", "fly.dev", "web.app",
    "firebaseapp.com", "firebaseio.com", "appspot.com", "azurewebsites.net", "cloudfront.net",
    "amazonaws.com", "trycloudflare.com", "pipedream.net", "oast.pro", "oast.live",
    "oast.site", "oast.online", "oast.fun", "oast.me", "burpcollaborator.net", "supabase.co",
    "deno.dev", "railway.app", "loca.lt", "serveo.net", "webhook.site", "requestcatcher.com")
"""Domains under which anyone gets a host of their own (hosting, tunnels, request catchers):
a host under one is its own site, never the sibling of another under it."""
_COUNTRY_SECOND = frozenset({"co", "com", "net", "org", "gov", "ac", "edu", "ne", "or"})
_SHOWN = 3
_NAMED = 8  # hosts of the predecessor named beside the evidence


def site_of(host: str) -> str:
    """The site `host` belongs to, as a registrable domain approximates it: an address or a
    host under a shared suffix (`SHARED_SUFFIXES`) is its own; else the last two labels,
    three under a country's second level (`api.example.co.uk` -> `example.co.uk`). A new
    subdomain of a domain the predecessor named (`api2.solana.com` beside
    `api.devnet.solana.com`) is the same site: whoever holds the domain chose both, and an
    SDK adding a region or a version of its own API is what releases do."""
    labels = host.split(".")
    if host == "localhost" or labels[-1].isdigit() or ":" in host:
        return host
    if any(host == suffix or host.endswith("." + suffix) for suffix in SHARED_SUFFIXES):
        return host
    if len(labels) > 2 and len(labels[-1]) == 2 and labels[-2] in _COUNTRY_SECOND:
        return ".".join(labels[-3:])
    return ".".join(labels[-2:])


def _named(hosts: frozenset[str]) -> str:
    shown = sorted(hosts)[:_NAMED]
    more = f" and {len(hosts) - _NAMED} more" if len(hosts) > _NAMED else ""
    return ", ".join(shown) + more if shown else "no host"


def new_destinations(new: Capabilities, previous: Capabilities) -> list[str]:
    """Details naming, per phase, each network call of `new` to a host whose site
    `previous`'s code that runs never named, in a phase where `previous` already reached the
    network (where it did not, reaching it at all is the gain `gained` judges). Loopback is
    a host like any other: a release that begins sending to `127.0.0.1` sends somewhere its
    predecessor did not (a local wallet's or agent's port is worth stealing from too)."""
    sites = frozenset(site_of(host) for host in previous.hosts)
    details: list[str] = []
    for phase in (INSTALL, LOAD):
        if NETWORK not in previous.at(phase):
            continue
        fresh: list[Sent] = [sent for sent in new.sent if sent.phase == phase
                             and sent.host not in previous.hosts
                             and site_of(sent.host) not in sites]
        if not fresh:
            continue
        places = "; ".join(sent.text() for sent in fresh[:_SHOWN])
        more = f"; and {len(fresh) - _SHOWN} more" if len(fresh) > _SHOWN else ""
        details.append(f"{phase}-time code sends to a host the release before never named: "
                       f"{places}{more} (the release before named {_named(previous.hosts)})")
    return details
