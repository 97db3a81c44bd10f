"""Why a lookup missed (design section 14): the reasons, from what the core reported."""
