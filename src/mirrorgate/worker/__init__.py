"""The worker: receives mirror jobs, re-gates them, verifies the bytes and publishes to private.

`loop` drives the queue (receive, hold, drain); the other modules are one job's steps.
"""
