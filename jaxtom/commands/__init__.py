"""The command line's layer: the only package that imports every other one (configs name a
paper; these modules dispatch to it), so no library package imports upward."""
