"""Tensor Memory Explorer, the Streamlit app: ``streamlit run app/main.py``.

Pages lay out what ``analysis/`` computes."""
