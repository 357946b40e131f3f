"""Models compiled from RASP programs by Tracr (Lindner et al. 2023): every head written by a program, so its role
is known by construction. `config` reads and writes the folder (torch only), `architecture` runs it in torch, and
`tracr_bridge` (the one module that imports tracr and jax) compiles a program or converts Tracr's own model."""
