"""A plugin for fw's tests whose loading kills its process (entry point `dying`)."""

import os

os._exit(4)
