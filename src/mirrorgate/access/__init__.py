"""Who a client is: static client tokens, CI ID tokens through the issuer lines, the access
decision and the operators; used by `serve` (the middleware applying it, the status page) and
the commands (`mirrorgate token`, `check-config`'s clients).

One idea per module: `tokens` (the tokens file, parsed, matched and re-read), `claims` (issuer
lines and the identity a verified ID token names), `oidc` (verifying an ID token against its
issuer's keys), `decision` (a presented token's client, or the refusal), `operators` (who reads
every client's pulls).
"""
