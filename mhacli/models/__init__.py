"""Real models as they ship: an untrusted model folder (``files``, ``tensors``), its
config and one layer's tensors read as a family's record says (``reading``,
``families``), one layer's typed reading (``layer``), and real text through the model
(``text``, ``tokens``). Imports the engine and the errors, never ``mhacli.io``."""
