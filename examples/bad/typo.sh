#!/bin/bash
#SBATCH --job-name=typo
#SBATCH --time=00:10:00
#DATA archvie=results/
#DATA exempt=scratch/
srun ./simulate --out results/ --tmp scratch/
