"""Images: masked patch reconstruction — the image, its mask, the reconstruction and the error, and the memory on it.

The chunk is the stepper's: the browser reports the chunk it shows, and the page draws its patch here."""

from __future__ import annotations

import streamlit as st

from analysis.figures.escape import markdown_text
from analysis.figures.images import memory_overlay_figure, reconstruction_figure, write_places_figure
from analysis.measures.images import grid_aligned, memory_on_image, write_alignment, write_places
from app import cache, layout, state, stepping

context = state.current()
layout.require_checkpoint(context, "Images", "reconstructs images through a masked_patches checkpoint")
if context.task != "masked_patches":
    layout.header(context, "Images", "Masked patch reconstruction on real photographs.")
    st.info(
        f"{markdown_text(context.ref.label)} is {layout.a_task(context.task)} checkpoint. The image view shows "
        f"masked patch reconstruction: pick `masked_patches-tensor` (or -base, -local, -registers) in the sidebar.",
        icon=":material/info:",
    )
    st.stop()

chunk = stepping.stepped_page(
    context,
    "Images",
    "A held-out photograph with some patches hidden, as the model sees "
    "it one patch (one memory chunk) at a time in raster order: what it "
    "puts back, where it is wrong, and what its memory holds over the "
    "image.",
    key="images",
)
rec = cache.reconstruction(context.ref, context.sample)
patch, row, col = rec.chunk_patch(chunk, int(context.trace.info.get("chunk_size", 1)))
layout.chart(reconstruction_figure(rec, current_patch=patch), "reconstruction", height=300)
psnr_col, ssim_col, patch_col = st.columns(3)
psnr_col.metric(
    "PSNR on the hidden pixels",
    f"{rec.psnr:.2f} dB",
    delta=f"{rec.psnr_gain:+.2f} dB vs the visible mean",
    help="Peak signal-to-noise ratio (skimage.metrics, data range 1) over the hidden patches' pixels; "
    "tensor-memory eval averages it over images.",
)
ssim_col.metric(
    "SSIM on the hidden pixels",
    f"{rec.ssim:.3f}",
    delta=f"{rec.ssim_gain:+.3f} vs the visible mean",
    help="The structural-similarity map of the reconstruction against the image, averaged over the hidden pixels.",
)
patch_col.metric(
    f"Patch {patch} (row {row}, column {col})",
    "hidden" if rec.masked[patch] else "visible",
    help="The patch of the current chunk, outlined in green above.",
)

if not layout.memory_notice(context, "The memory's views on the image"):
    st.stop()
lay = context.trace.layer(context.layer)
places = write_places(context.trace, context.layer)
overlay_col, places_col = st.columns(2)
with overlay_col:
    st.markdown(f"**‖h‖ after chunk {chunk}, over the image**")
    if grid_aligned(context.trace, context.layer):
        series = cache.volume_series(context.ref, context.sample, context.layer, "h", "norm", 0)
        values = memory_on_image(context.trace, chunk, context.layer)
        high = series.value_range[1]
        layout.chart(
            memory_overlay_figure(rec.image, values, rec.patch, patch, value_range=(0.0, high)),
            "memory_on_image",
            height=340,
        )
        st.caption(
            f"The memory's {lay.grid[1]} × {lay.grid[2]} plane is the image's patch grid: each voxel column "
            f"(averaged over its {lay.grid[0]} layers of depth) is drawn over its patch."
        )
    else:
        st.info(
            f"This memory's grid {lay.grid} (D, H, W) is not the image's {rec.patch_grid} × {rec.patch_grid} patch "
            f"grid, so there is no voxel above each patch to draw.",
            icon=":material/grid_off:",
        )
with places_col:
    fit = write_alignment(places)
    st.markdown(
        f"**Where each patch was written** · the patches' places explain {fit['r2_x']:.0%} of the writes' "
        f"x and {fit['r2_y']:.0%} of their y"
    )
    layout.chart(write_places_figure(places, chunk, lay.grid), "write_places", height=380)
    st.caption(
        "Grey squares: each patch's place in the image, on the memory's x–y plane; dots: where its write "
        "went (μ_write). A memory that keeps the image's layout writes each patch near its own square."
    )
