"""The search over pipeline schedules: a large-neighbourhood search (`lns`) over the orders the pipeline models of
`formulations` time and re-solve, its neighbourhoods (`neighbourhoods`), its phases on a mirror half (`half`), a
periodic start (`periodic`), and the full solve around it (`solve`); its tuning as data (`policy`)."""
