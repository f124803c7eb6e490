"""What the gate must not forget, held in memory and kept current from the state store:
`facts` (the memory and its writer), `firstparty` (names remembered as the organisation's),
`withdrawals` (mirrored versions public took down), `waivers` (the operator's, handed to the
rules), `imported` (the files kept before the state store). Below every other part of the
gate: it reads only the cache's marker and the records.
"""
