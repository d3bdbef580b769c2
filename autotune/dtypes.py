"""The element types autotune knows and their sizes: one table for the IR, codegen and the target.

    >>> ITEMSIZE["float32"], "float64" in FLOAT_DTYPES
    (4, True)
"""
DTYPES = ("float32", "float64", "int64", "int32", "bool")
ITEMSIZE = {"float32": 4, "float64": 8, "int64": 8, "int32": 4, "bool": 1}  # bytes per element
FLOAT_DTYPES = ("float32", "float64")
