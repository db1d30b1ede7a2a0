"""The reading wing of the pipeline: an input (a file of any format, standard input, the Python API's data) as
chunks of records (`formats/`: one reader per format; `stdin`, `frames`), records as the readout's rows
(`read`), and the sources the loop reads them from (`source`). It imports nothing of the pipeline above it,
nor the writing wing (output/); `formats/` imports nothing of the pipeline at all."""
