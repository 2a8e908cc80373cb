"""The steps of a document batch, one module each, around one shared runner (``runner.StepRunner``)."""
