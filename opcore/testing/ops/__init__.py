"""The kit entries of the built-in ops, one module per op family (as opcore.opset)."""
