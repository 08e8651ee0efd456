"""Export for serving: a checkpoint written by any world size -> one TensorFlow SavedModel (and ONNX).

`python -m dlrm.export --checkpoint DIR --out DIR` (or `main.py --saved_model_output_path DIR` at the
end of training) rebuilds the model of the checkpoint's own configuration in one process, restores
its weights (whole tables assembled from the pieces of every rank, no optimizer state) and saves one
serving signature with named inputs (docs/export.md). Modules by job, from the bottom up: `errors`,
`source` (which checkpoint, its configuration and feature spec), `fits` (does it fit one host),
`inputs` (the serving inputs' layout), `serving` (the tf.Module),
`onnx_model`, `saved_model` (the whole export), `cli`, `after_training` (the export main.py chains after
training). The output directory follows the rule of every output (`dlrm.output_dir`). Nothing in the
trainer imports this package.
"""
