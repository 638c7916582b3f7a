"""Answers against a trace: judging, carried errors, named mistakes."""
