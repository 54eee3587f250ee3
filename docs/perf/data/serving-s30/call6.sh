#!/usr/bin/env bash
# Session 30, call 6: branch `calib` with the stripe planned within a sixth
# of the memory (`headroom`) against the same with a third (`headroom-third`,
# call 5's binary), one H100: call 5's script with that baseline.
# Build: as call5.sh, then call 5's headroom copied to .devbin/calib/headroom-third.
# carry [".devbin/calib"].
exec bash "$(dirname "$0")/call5.sh" headroom-third call6
