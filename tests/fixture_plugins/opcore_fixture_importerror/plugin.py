"""opcore test fixture: the import fails, as with a missing shared library."""

raise ImportError("libwidget.so.3: cannot open shared object file")
