"""Views of a trace or a report: Rich tables, plain text, Markdown, LaTeX, JSON."""
