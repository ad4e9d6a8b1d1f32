# Helpers shared by the bench scripts (sourced, not run).

# median [FILE|-] [FORMAT]: the median of the numbers in FILE (standard input
# when - or absent), the mean of the middle two for an even count, printed
# with FORMAT (default %.1f); "-" when there are none.
median() {
	sort -g "${1:--}" 2>/dev/null | awk -v f="${2:-%.1f}" '{v[NR]=$1} END {
		if (NR == 0) { print "-"; exit }
		if (NR % 2) printf f "\n", v[(NR+1)/2]
		else printf f "\n", (v[NR/2] + v[NR/2+1]) / 2 }'
}

# spread [FILE|-]: "min-max" of the numbers in FILE, "-" when there are none.
spread() {
	sort -g "${1:--}" 2>/dev/null | awk 'NR==1{lo=$1} {hi=$1} END{if (NR) printf "%.0f-%.0f", lo, hi; else print "-"}'
}
