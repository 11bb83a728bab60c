import warnings

# futurist and oslo.privsep import eventlet whenever it is installed, and
# eventlet warns that it is deprecated on import; nothing here runs on it
# (see cyborg/service.py).
warnings.filterwarnings('ignore', message=r'\s*Eventlet is deprecated')
