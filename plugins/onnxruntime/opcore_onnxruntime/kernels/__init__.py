"""ONNX builders per op family; each module-level OnnxOp is a kernel."""
