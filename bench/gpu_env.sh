# Sourced by the bench scripts that run on the lent GPU machines.
# The H200 image's Python loads an older libstdc++ first; formatting a number in an error
# message then crashes (seen in every build there). The system one fixes it.
if [ -f /lib/x86_64-linux-gnu/libstdc++.so.6 ]; then
  export LD_PRELOAD=/lib/x86_64-linux-gnu/libstdc++.so.6
fi
