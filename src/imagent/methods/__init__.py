"""The retrieval methods, one module each (``imagent.methods.<name>``), standing on :mod:`imagent.methods.base`.

A method's module is imported when the method is first asked for (:func:`imagent.methods.base.get_method`
looks it up in the :data:`~imagent.methods.base.METHODS` registry by import path), so naming one method never
imports the others.
"""
