"""Album search: everything that searches one person's photo album lives here.

The album tools (ImageSearch, GetMetadata, FilterMetadata, ViewPhotos), the album agents' memories, skills, prompts
and the one scaffold policy applied equally to PhotoCraft and ImageSeeker, and imagent's own ``album`` method (a
planner: one grammar-constrained model call parses the query into a typed plan that code executes). ``agents/``
stays generic and imports nothing from here.
"""
