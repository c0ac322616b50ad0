"""The diffusion model families cosmos-train trains: one adapter file each (`DiffusionAdapter` subclasses whose
`pipeline_class` names the diffusers pipeline they drive; `diffusion.adapter.adapters()` finds them here)."""
