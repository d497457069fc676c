"""`trialog worker KIND`: one module per worker process kind."""
