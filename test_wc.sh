wc.sh written
test = cat
