#!/bin/bash
#SBATCH --job-name=align-NA12878
#SBATCH --cpus-per-task=16
#SBATCH --mem=64G
#SBATCH --time=08:00:00
#
# Stage the reference database in before the job starts (the job waits in
# the queue, not on the compute node, while it is copied), plus the capture
# panel from the sequencing core's web server. Sorted chunks are throwaway;
# the aligned BAMs go to the archive tier and leave scratch once verified.
#DATA stage_in=/archive/ref/GRCh38/ to=ref
#DATA stage_in=https://data.example.org/panels/exome_v2.bed to=ref/panel.bed
#DATA exempt=tmp          # sorted chunks, throwaway
#DATA archive="aligned bams/" keep=no
#DATA stage_out=qc to=/project/lab/qc/%x-%j

set -euo pipefail
mkdir -p tmp "aligned bams" qc
bwa mem -t "$SLURM_CPUS_PER_TASK" ref/GRCh38.fa reads/NA12878_R1.fq.gz reads/NA12878_R2.fq.gz \
	| samtools sort -T tmp/chunk -o "aligned bams/NA12878.bam"
samtools flagstat "aligned bams/NA12878.bam" > qc/flagstat.txt
