"""Hang forensics, a stage of its own: which rank stopped where, in which group and strategy, from the Flight
Recorder's dumps or the traces (``forensics.hang_document``; its reading of the store in ``forensics.sql``)."""
