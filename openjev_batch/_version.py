"""The package's version, on the lowest floor: the output manifest, the eval report and `--version` read it
here, so none of them imports the package face (`__init__`, which stands on top: it hands on the API)."""

__version__ = "0.1.0"
