// A list that draws only the rows in view (plus a margin): the scroll height stands for every
// row, the DOM holds a few dozen. Rows have one fixed height, so the visible range is a division.

export class WindowedList<T> {
  private items: T[] = [];
  private renderRow: (item: T, index: number) => HTMLElement = () => document.createElement('div');
  private frame = 0;
  private readonly sizer: HTMLElement;

  constructor(
    readonly scroller: HTMLElement,
    private readonly rowHeight: number,
    private readonly overscan = 8,
    /** Space above the rows inside the scroller (a sticky header row). */
    private readonly offset = 0,
  ) {
    this.sizer = document.createElement('div');
    this.sizer.className = 'window-sizer';
    this.sizer.setAttribute('role', 'rowgroup');
    scroller.append(this.sizer);
    scroller.addEventListener('scroll', () => this.schedule(), { passive: true });
    window.addEventListener('resize', () => this.schedule());
  }

  setItems(items: T[], renderRow: (item: T, index: number) => HTMLElement): void {
    this.items = items;
    this.renderRow = renderRow;
    // CSSOM, not a style attribute: the page's CSP allows no inline styles.
    this.sizer.style.height = `${items.length * this.rowHeight}px`;
    this.scroller.scrollTop = 0;
    this.draw();
  }

  /** How many row elements are in the DOM now. */
  get drawn(): number {
    return this.sizer.childElementCount;
  }

  private schedule(): void {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.draw();
    });
  }

  draw(): void {
    const top = Math.max(0, this.scroller.scrollTop - this.offset);
    const view = this.scroller.clientHeight || 600;
    const first = Math.max(0, Math.floor(top / this.rowHeight) - this.overscan);
    const last = Math.min(this.items.length, Math.ceil((top + view) / this.rowHeight) + this.overscan);
    const rows: HTMLElement[] = [];
    for (let i = first; i < last; i++) {
      const el = this.renderRow(this.items[i], i);
      el.style.top = `${i * this.rowHeight}px`;
      rows.push(el);
    }
    this.sizer.replaceChildren(...rows);
  }
}
