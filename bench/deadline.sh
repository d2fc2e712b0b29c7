# Sourced by the one-call device scripts (h200_once.sh, h200_profile.sh, h200_stalls.sh): each
# step of a call is capped so that the whole ends before the caller's deadline (DEADLINE_S
# seconds from the script's start, else the default the script passes: `deadline_from 560`).
deadline_from() { deadline=${DEADLINE_S:-$1}; }
left() {  # seconds to the deadline, at most $1
  local r=$((deadline - SECONDS))
  [ "$r" -gt "$1" ] && r=$1
  echo "$r"
}
