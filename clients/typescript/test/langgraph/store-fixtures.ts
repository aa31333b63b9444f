// What the store specs share: a deterministic character embedder (the one
// LangGraph.js's store tests use: one count per character at
// charCode % dims over the first dims characters, then L2-normalised), and
// a small seeded random generator.
import { Embeddings } from "@langchain/core/embeddings";

export class CharacterEmbeddings extends Embeddings {
  calls = 0;
  constructor(readonly dims = 500) {
    super({});
  }
  embed(text: string): number[] {
    const v = new Array<number>(this.dims).fill(0);
    for (let i = 0; i < Math.min(text.length, this.dims); i++) v[text.charCodeAt(i) % this.dims]! += 1;
    const norm = Math.sqrt(v.reduce((a, x) => a + x * x, 0));
    return v.map((x) => x / norm);
  }
  async embedDocuments(texts: string[]): Promise<number[][]> {
    this.calls++;
    return texts.map((t) => this.embed(t));
  }
  async embedQuery(text: string): Promise<number[]> {
    this.calls++;
    return this.embed(text);
  }
}

/** The cosine similarity of two vectors, as InMemoryStore computes it. */
export function cosine(a: number[], b: number[]): number {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i]! * b[i]!;
    na += a[i]! * a[i]!;
    nb += b[i]! * b[i]!;
  }
  return na && nb ? dot / Math.sqrt(na) / Math.sqrt(nb) : 0;
}

/** mulberry32: a small seeded generator of floats in [0, 1). */
export class Rng {
  private s: number;
  constructor(seed: number) {
    this.s = seed >>> 0;
  }
  next(): number {
    this.s = (this.s + 0x6d2b79f5) >>> 0;
    let t = this.s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }
  pick<T>(xs: readonly T[]): T {
    return xs[Math.floor(this.next() * xs.length)]!;
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
